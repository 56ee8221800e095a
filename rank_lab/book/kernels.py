"""The Jupyter kernels the book starts talk over encrypted ZeroMQ sockets (CurveZMQ).

ipykernel (7.4 and later) warns on every start over TCP without encryption ("Kernel is running
over TCP without encryption ...", on the kernel's stderr: the papermill runs and the jupyter-book
build log). The cause is the kernel *manager*: jupyter_client's ``KernelManager`` only provisions
CurveZMQ keys when its ``transport_encryption`` policy is ``"auto"`` or ``"required"``, and the
default is ``"disabled"``, although the venv's kernelspec declares
``metadata.supported_encryption: [curve]``. With ``"auto"`` the manager writes a key pair into the
connection file, the kernel encrypts its sockets and has nothing to warn about; a kernelspec that
does not declare curve support still starts unencrypted, as before.

* :func:`rank_lab.book.run_notebook` (papermill) passes :func:`kernel_manager_config` to the
  notebook client;
* the book build (myst-nb, which creates its kernel managers without any configuration) calls
  :func:`encrypt_kernel_transport` from the Sphinx extension ``book/_ext/kernel_transport.py``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["curve_available", "kernel_manager_config", "encrypt_kernel_transport"]


def curve_available() -> bool:
    """Whether the installed libzmq supports CurveZMQ (pyzmq wheels ship it with libsodium)."""
    import zmq

    return bool(zmq.has("curve"))


def kernel_manager_config() -> Any:
    """A traitlets ``Config`` for notebook clients: ``KernelManager.transport_encryption = "auto"``.

    Empty when libzmq has no CurveZMQ (then the policy must stay ``"disabled"``: jupyter_client
    refuses ``"auto"`` without it).
    """
    from traitlets.config import Config

    config = Config()
    if curve_available():
        config.KernelManager.transport_encryption = "auto"
    return config


def encrypt_kernel_transport() -> bool:
    """Make ``"auto"`` the default ``transport_encryption`` of every jupyter_client kernel manager.

    For executors that create kernel managers without a configuration (myst-nb in the book build).
    Returns whether the default was changed (``False`` without CurveZMQ support).
    """
    if not curve_available():
        return False
    from jupyter_client import KernelManager

    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is None:  # a jupyter_client older than the policy: nothing to configure
        return False
    trait.default_value = "auto"
    return True
