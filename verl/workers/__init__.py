"""Workers: the processes that hold a model role (actor + rollout + reference, critic, reward model).

Each worker owns its model, optimizer and sharding; the trainer talks to them only through worker
groups (`verl.single_controller`) and `verl.protocol.DataProto` batches. Rollout engines live in
`verl.workers.rollout`.
"""
