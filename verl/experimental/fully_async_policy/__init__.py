"""verl's fully async recipe: ``python -m verl.experimental.fully_async_policy.fully_async_main``."""
