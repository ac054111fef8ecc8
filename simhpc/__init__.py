"""simhpc: a discrete-event simulator of HPC and ML-training clusters."""

__version__ = "0.1.0"
