"""Sphinx extension: the kernels that execute the book's notebooks use encrypted ZeroMQ sockets.

myst-nb starts each notebook's kernel with a jupyter_client kernel manager created without any
configuration, whose ``transport_encryption`` policy defaults to ``"disabled"``; ipykernel then
logs "Kernel is running over TCP without encryption" into the build log for every page. This
extension makes ``"auto"`` the default before any notebook executes (the venv's kernelspec
declares CurveZMQ support): see :mod:`rank_lab.book.kernels`.
"""

from __future__ import annotations


def setup(app):
    from rank_lab.book.kernels import encrypt_kernel_transport

    encrypt_kernel_transport()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
