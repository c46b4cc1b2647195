"""``from verl.utils.config import load_config``: the import path the product's documents use.

A thin re-export of :mod:`verl.config`; see :func:`verl.config.loader.load_config`.
"""

from __future__ import annotations

from verl.config import ConfigError, RootConfig, config_from_dict, load_config, save_config

__all__ = ["ConfigError", "RootConfig", "config_from_dict", "load_config", "save_config"]
