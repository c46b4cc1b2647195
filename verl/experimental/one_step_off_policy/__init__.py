"""verl's one-step off-policy recipe: ``python -m verl.experimental.one_step_off_policy.main_ppo``."""
