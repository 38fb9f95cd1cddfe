"""The sandbox-backed `code_eval` metric (load the directory with `evaluate.load`)."""
