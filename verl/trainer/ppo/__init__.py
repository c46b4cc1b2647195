"""verl's ``verl.trainer.ppo`` import path: ``core_algos`` (extension registries with verl's signatures)."""
