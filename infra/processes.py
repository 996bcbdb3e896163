"""Worker processes that a Ctrl-C in the terminal does not reach: the command that started them
stops them, at once, whatever ends it."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def interrupt_proof_pool(context, processes: int, initializer=None, initargs=()):
    """A multiprocessing pool that Ctrl-C does not reach, ended at once when its user stops.

    A terminal sends SIGINT to its whole foreground process group, the workers with the parent:
    each raised KeyboardInterrupt wherever it was (a spawned one in the middle of its imports),
    printed a traceback, and the pool waited on them for ever (issue 47, item 3). So the workers
    start with SIGINT blocked (a mask is inherited across fork and exec) and then ignore it, and
    the parent, which alone gets KeyboardInterrupt, terminates them on its way out, whatever ends
    it. A Ctrl-C while the workers start is raised once they have."""
    pool = None
    try:
        with _sigint_held(context):
            pool = context.Pool(processes, _worker_start, (initializer, initargs))
        yield pool
        pool.close()
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        if pool is not None:
            pool.join()


def _worker_start(initializer, initargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # for good: nothing below may unblock it and be interrupted
    if initializer:
        initializer(*initargs)


@contextlib.contextmanager
def _sigint_held(context):
    """SIGINT blocked in this thread while processes start, so that they start with it blocked, and
    one that comes meanwhile recorded, not raised in the middle of the start (a process's other
    threads may take it), and raised after."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    if context.get_start_method() != "fork":
        # started inside Pool() otherwise, the tracker unblocks SIGINT in this thread when it is up
        # (cpython 3.11-3.13 Lib/multiprocessing/resource_tracker.py ensure_running)
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one held by this thread comes now, to the recorder
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt
