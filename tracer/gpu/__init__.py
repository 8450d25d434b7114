"""The GPU through NVML (`nvml`) and its idle spans explained by the training loop (`idle`)."""
