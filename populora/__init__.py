"""PopuLoRA: population self-play RL for LLM reasoning with LoRA adapters on one frozen base model."""

__version__ = "0.1.0"
