"""rediloco.examples: runnable training scripts (python3 -m rediloco.examples.gpt)."""
