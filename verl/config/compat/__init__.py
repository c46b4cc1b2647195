"""Compatibility with verl's configs and the product's seed documents, in one sub-package.

- :mod:`~verl.config.compat.verl_keys`: what each key of verl's reference config does here (the
  compat table's rows, by pattern); :mod:`~verl.config.compat.verl_inert` verl's keys without
  effect here (not schema fields) with verl's defaults, applied at load;
  :mod:`~verl.config.compat.verl_keys_checks` the rules of the conditional keys,
  :mod:`~verl.config.compat.verl_keys_layout` the rows of verl's current layout.
- :mod:`~verl.config.compat.verl_layout`: verl's current layout normalised onto the schema
  (``_target_`` markers, :mod:`~verl.config.compat.verl_targets`; ``reward.*``,
  :mod:`~verl.config.compat.reward_layout`); :mod:`~verl.config.compat.verl_hints` the hints for
  keys verl renamed or features the product lacks.
- :mod:`~verl.config.compat.schema_verl`: the schema sections of verl's checkpoint engine,
  profiling, reward and Ray settings.
- :mod:`~verl.config.compat.seed_layout`: the short layout of the product's seed documents.

Nothing here imports torch.
"""
