"""cw: launch LLM post-training runs on a Kubernetes GPU cluster."""

__version__ = "0.1.0"
