"""verl's experimental paths (``verl.experimental.*``): the async entry points, run on the V1 machinery
(`verl.trainer.async_rl`), and the agent-loop API (`verl.experimental.agent_loop`)."""
