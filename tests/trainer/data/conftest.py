from tests.trainer.one_thread import _one_torch_thread

__all__ = ["_one_torch_thread"]
