"""verl's experimental entry paths (``verl.experimental.*``), run on the V1 machinery (`verl.trainer.async_rl`)."""
