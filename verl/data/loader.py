"""`RLDataLoader`: a resumable, seeded prompt loader over `RLHFDataset`.

Built on ``torchdata``'s `StatefulDataLoader` with its stateful `RandomSampler`: the sampler's
generator state travels in `state_dict()`, so a run resumed mid-epoch or at an epoch boundary sees
exactly the batches an uninterrupted run would (an unseeded or unrestored sampler
would not).
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import Sampler, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from verl.config.schema import DataConfig, ModelConfig
from verl.data.rl_dataset import RLHFDataset
from verl.data.tokenizer import BUILTIN_SCHEME, load_tokenizer
from verl.protocol import collate_fn

SPLITS = ("train", "val")


def resolve_tokenizer_path(config: DataConfig, model_path: str | None = None) -> str:
    """Where the loader's tokenizer comes from: data.tokenizer, else the model path.

    The model path is ``model_path`` or, for a section produced by `load_config`, the run's
    ``actor_rollout_ref.model`` (tokenizer_path, else path).

    With neither, and every data file built in, the default built-in model's tokenizer is used
    (the built-in tasks are written for it); a real data file without a tokenizer is an error
    rather than a silent guess.

    Raises:
        ValueError: no tokenizer source for non-built-in data.
    """
    if config.tokenizer:
        return config.tokenizer
    if model_path:
        return model_path
    root = getattr(config, "_root", None)  # set by load_config: the run's actor model
    if root is not None:
        model = root.actor_rollout_ref.model
        return model.tokenizer_path or model.path
    files = list(config.train_files) + list(config.val_files)
    if files and all(f.startswith(BUILTIN_SCHEME) for f in files):
        return ModelConfig().path
    raise ValueError(
        "RLDataLoader needs a tokenizer: set data.tokenizer, or pass tokenizer=... or model_path=... "
        "(usually actor_rollout_ref.model.path)"
    )


def create_rl_dataset(
    data_files: str | Sequence[str],
    tokenizer: Any,
    config: DataConfig,
    processor: Any = None,
    tool_schemas: list[dict[str, Any]] | None = None,
) -> Any:
    """Build the RL prompt dataset for some files (see `RLHFDataset`).

    ``data.custom_cls.{path,name}`` names a user dataset class instead, built with verl's
    keyword arguments ``cls(data_files=, tokenizer=, processor=, config=)``; its items must be
    what `RLHFDataset.__getitem__` returns (it reads ``config.tool_config_path`` itself, as in verl).

    Args:
        tool_schemas: the tool schemas of ``data.tool_config_path`` (``verl.tools.load_tool_schemas``);
            ``data.filter_overlong_prompts`` then measures prompts with them rendered.

    Raises:
        ValueError: ``data.tool_config_path`` set under ``data.filter_overlong_prompts`` without
            ``tool_schemas`` (this layer does not build tools; the trainer passes them).
    """
    custom = config.custom_cls
    if custom.path:
        from verl.utils.import_utils import load_extern_type

        cls = load_extern_type(custom.path, custom.name or "")
        return cls(data_files=data_files, tokenizer=tokenizer, processor=processor, config=config)
    if tool_schemas is None and config.tool_config_path and config.filter_overlong_prompts:
        raise ValueError(
            f"data.tool_config_path={config.tool_config_path!r} with data.filter_overlong_prompts: pass "
            "tool_schemas=verl.tools.load_tool_schemas(data.tool_config_path) so prompts are measured with "
            "the tools rendered"
        )
    return RLHFDataset(data_files, tokenizer, config, processor=processor, tool_schemas=tool_schemas)


def limit_samples(dataset: Any, config: DataConfig, split: str) -> Any:
    """The first ``N`` samples of ``dataset`` (file order), N from ``data.{train,val}_max_samples``.

    ``data.max_samples`` applies to both splits unless the split's own key is set; -1 = all.
    """
    own = config.train_max_samples if split == "train" else config.val_max_samples
    limit = own if own > 0 else config.max_samples
    if limit <= 0 or limit >= len(dataset):
        return dataset
    return torch.utils.data.Subset(dataset, range(limit))


def create_rl_sampler(config: DataConfig, dataset: Any, shuffle: bool) -> Sampler[int]:
    """A stateful random sampler seeded with data.seed, or a sequential one.

    Each epoch draws a fresh permutation from the same generator, so epoch 2 differs from epoch 1
    and both are fixed by the seed.
    """
    if not shuffle:
        return SequentialSampler(dataset)
    generator = torch.Generator()
    generator.manual_seed(int(config.seed))
    return RandomSampler(dataset, generator=generator)


class RLDataLoader:
    """Batches of prompts for RL: ``dict`` of ``(B, P)`` tensors and ``(B,)`` object arrays.

    Train split: ``B = data.train_batch_size``, shuffled with data.seed when data.shuffle,
    data.drop_last honoured. Val split: ``B = data.val_batch_size`` or the whole set, in file
    order (shuffled with data.seed when data.validation_shuffle), nothing dropped. Each split
    holds at most ``data.{train,val}_max_samples`` (or ``data.max_samples``) samples. Iterating
    once = one epoch; `state_dict` / `load_state_dict` resume mid-epoch or between epochs with
    the same subsequent batches.

    Args:
        config: the ``data`` section of the config.
        tokenizer: tokenizer to use; None loads data.tokenizer or ``model_path``.
        split: ``train`` (data.train_files) or ``val`` (data.val_files).
        dataset: a ready dataset (skips reading files and tokenizer loading).
        model_path: the actor model path, used for the tokenizer when data.tokenizer is None.
        processor: optional multimodal processor passed to `RLHFDataset`.
        tool_schemas: the tool schemas of ``data.tool_config_path`` (see `create_rl_dataset`).

    Raises:
        ValueError: unknown split, no files for the split, no tokenizer source, or a train batch
            larger than the dataset with drop_last (no batch at all).
    """

    def __init__(
        self,
        config: DataConfig,
        tokenizer: Any = None,
        split: str = "train",
        dataset: Any = None,
        *,
        model_path: str | None = None,
        processor: Any = None,
        tool_schemas: list[dict[str, Any]] | None = None,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        self.config = config
        self.split = split
        if dataset is None:
            files = config.train_files if split == "train" else config.val_files
            if not files:
                raise ValueError(f"data.{split}_files is empty")
            if tokenizer is None:
                tokenizer = load_tokenizer(resolve_tokenizer_path(config, model_path), config.trust_remote_code)
            dataset = limit_samples(create_rl_dataset(files, tokenizer, config, processor, tool_schemas), config, split)
        self.tokenizer = tokenizer
        self.dataset = dataset
        is_train = split == "train"
        # DAPO dynamic sampling generates data.gen_batch_size prompts per batch (config-checked)
        train_size = getattr(config, "gen_batch_size", None) or config.train_batch_size
        self.batch_size = int(train_size if is_train else (config.val_batch_size or len(dataset)))
        drop_last = bool(config.drop_last) if is_train else False
        if self.batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {self.batch_size}")
        if drop_last and self.batch_size > len(dataset):
            raise ValueError(
                f"data.train_batch_size {self.batch_size} > {len(dataset)} prompts with drop_last: no full batch"
            )
        self.sampler = create_rl_sampler(
            config, dataset, shuffle=config.shuffle if is_train else config.validation_shuffle
        )
        with warnings.catch_warnings():  # torchdata 0.11 calls the deprecated torch.set_vital in __init__
            warnings.filterwarnings("ignore", message=".*set_vital.*")
            self._loader = StatefulDataLoader(
                dataset,
                batch_size=self.batch_size,
                sampler=self.sampler,
                num_workers=config.dataloader_num_workers,
                drop_last=drop_last,
                collate_fn=collate_fn,
            )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """One epoch (or its rest, after `load_state_dict` mid-epoch)."""
        return iter(self._loader)

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._loader)

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch and the sampler's generator state (store it with the checkpoint)."""
        return self._loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict`: the next batches are those the saved loader would have given."""
        self._loader.load_state_dict(state)
