"""The native backend: PyTorch + transformers (+ peft) on a CPU or one CUDA GPU."""
