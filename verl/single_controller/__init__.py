"""Single controller: the Worker base, @register dispatch modes and worker-group backends.

`LocalWorkerGroup` runs the worker in the driver process (world size 1, zero overhead);
`RayWorkerGroup` runs one Ray actor per device (or CPU slot). Both expose every method a worker
class declares with `@register`, dispatched and collected the same way, so the trainer loop
never knows which backend it has.
"""

from verl.single_controller.base import Dispatch, Worker, WorkerGroup, register
from verl.single_controller.local import LocalWorkerGroup

__all__ = ["Dispatch", "LocalWorkerGroup", "Worker", "WorkerGroup", "register"]
