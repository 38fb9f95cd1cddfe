"""codeparrot: build your own code-completion model end to end.

The core library: configs, corpus and filters, tokenizer, model presets,
checkpoints and the inference engine. Importing this package does no work.
"""

__version__ = "0.1.0"
