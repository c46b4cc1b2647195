"""Build recipes of the built-in models (`verl.modules.builtin`): run only by ``verl builtin build``.

Each recipe initialises the spec's Llama and warm-starts it with the product's own SFT trainer
(`verl.commands.sft.train_sft`, the same path as ``verl sft``), so this package sits on the
top layer with the trainer. The resolver in `verl.modules.builtin` never imports it.

    tiny_arithmetic   ``tiny-arithmetic``: single-turn addition, a carry-forgetting teacher
    tiny_calculator   ``tiny-calculator``: multi-turn multiplication with calculator tool calls
    warm_start        the shared init + ``verl sft`` step
    build             ``verl builtin build|list``: the command, `BUILDERS`, the atomic cache write
"""
