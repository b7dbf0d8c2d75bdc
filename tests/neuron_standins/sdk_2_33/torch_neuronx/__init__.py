"""Stand-in TorchNeuron ``torch_neuronx`` 2.14: the native ``neuron`` device and ``nki_op``."""
import torch

__version__ = "2.14.0"
torch.utils.rename_privateuse1_backend("neuron")


class _RecordedOp:
    """The custom op ``nki_op`` registered; each call is recorded."""

    def __init__(self, name, op):
        self.name, self.op = name, op

    def __call__(self, *args, **kwargs):
        from standin_log import record

        record("torch_neuronx.nki_op call", self.name, (), args, kwargs)
        return self.op(*args, **kwargs)


def nki_op(name, mutates_args=(), **options):
    """Register the decorated launcher as the custom op ``name`` (as torch.library.custom_op does)."""
    import inspect

    from standin_log import CALLS

    def register(fn):
        op = torch.library.custom_op(name, mutates_args=mutates_args)(fn)
        CALLS.append({"entry": "torch_neuronx.nki_op", "kernel": name, "signature": str(inspect.signature(fn))})
        return _RecordedOp(name, op)

    return register
