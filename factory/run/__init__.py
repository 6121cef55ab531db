"""Run: the session plan, the lease queue, the runner and its session runners (fake, sandbox), progress."""
