"""Dynamic batching: concurrent requests to one signature are merged into one model call and split back.

A model call on a small network costs about the same for 1 row as for 100 (the
fixed TF call overhead dominates), so under concurrent load merging requests
multiplies throughput. As in TF Serving's batch scheduler:

- A batch starts with the oldest queued request and takes more, in arrival
  order, while it stays within max_batch_size rows. A request with more rows
  than that runs on its own (unsplit).
- A batch is run when it is full, or when batch_timeout_micros have passed since
  its first request arrived, and only when one of the num_batch_threads model
  threads is free. So with a timeout of 0 a lone request waits for nothing, while
  under load the requests that arrive during a model call form the next batch.
- The merged inputs are concatenated along dimension 0, the model runs in a
  thread (TF releases the GIL, so the event loop keeps reading requests), and
  each output is sliced back to its request.

If a merged call fails, each of its requests is run on its own, so a request the
model rejects cannot fail the others.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import time
from typing import Callable, Mapping

import numpy as np

from tfrl.model_server.options import BatchingOptions

ModelCall = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclasses.dataclass
class _Task:
    inputs: Mapping[str, np.ndarray]
    rows: int
    arrived: float  # time.monotonic(), s
    future: asyncio.Future


class ModelThreads:
    """The threads that run model calls, shared by every batcher of a server: num_batch_threads of them."""

    def __init__(self, num_threads: int):
        self.executor = concurrent.futures.ThreadPoolExecutor(num_threads, thread_name_prefix="model-call")
        self._num_threads = num_threads
        self._slots: asyncio.Semaphore | None = None  # made in the serving loop, on first use

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._num_threads)
        return self._slots

    async def run(self, call: ModelCall, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One model call on a free model thread."""
        async with self.slots:
            return await asyncio.get_running_loop().run_in_executor(self.executor, call, inputs)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


class Batcher:
    """Merges the requests to one signature of one loaded version. Lives in the serving event loop."""

    def __init__(self, call: ModelCall, options: BatchingOptions, threads: ModelThreads,
                 on_batch: Callable[[int], None] = lambda rows: None):
        """on_batch(rows) is told the size of each model call, for the metrics."""
        self._call = call
        self._max_rows = options.max_batch_size
        self._timeout_s = options.batch_timeout_micros / 1e6
        self._threads = threads
        self._on_batch = on_batch
        self._queue: collections.deque[_Task] = collections.deque()
        self._queued_rows = 0
        self._full = asyncio.Event()  # set when the queue holds max_batch_size rows: stop waiting for more
        self._scheduler: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()  # model calls in flight (kept referenced until done)

    async def submit(self, inputs: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """The outputs for these inputs (`rows` along dimension 0), from a model call shared with others."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Task(inputs, rows, time.monotonic(), future))
        self._queued_rows += rows
        if self._queued_rows >= self._max_rows:
            self._full.set()
        if self._scheduler is None:
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
        return await future

    async def _schedule(self) -> None:
        """Forms and starts batches while requests are queued; ends when the queue is empty."""
        try:
            while self._queue:
                await self._threads.slots.acquire()
                try:
                    await self._wait_for_rows()
                    batch = self._take_batch()
                except BaseException:
                    self._threads.slots.release()
                    raise
                call = asyncio.get_running_loop().create_task(self._run(batch))
                self._running.add(call)
                call.add_done_callback(self._running.discard)
        finally:
            self._scheduler = None

    async def _wait_for_rows(self) -> None:
        """Until the queue holds a full batch or the oldest request has waited batch_timeout_micros."""
        while self._queued_rows < self._max_rows:
            remaining = self._queue[0].arrived + self._timeout_s - time.monotonic()
            if remaining <= 0:
                return
            self._full.clear()
            try:
                await asyncio.wait_for(self._full.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self) -> list[_Task]:
        batch = [self._queue.popleft()]
        rows = batch[0].rows
        while self._queue and rows + self._queue[0].rows <= self._max_rows:
            task = self._queue.popleft()
            batch.append(task)
            rows += task.rows
        self._queued_rows -= rows
        return batch

    async def _run(self, batch: list[_Task]) -> None:
        """Runs one batch on the model thread whose slot _schedule took, and answers its requests."""
        loop = asyncio.get_running_loop()
        try:
            rows = sum(task.rows for task in batch)
            self._on_batch(rows)
            if len(batch) == 1:
                merged = batch[0].inputs
            else:
                merged = {name: np.concatenate([task.inputs[name] for task in batch]) for name in batch[0].inputs}
            try:
                outputs = await loop.run_in_executor(self._threads.executor, self._call, merged)
                if len(batch) > 1 and any(array.ndim == 0 or array.shape[0] != rows for array in outputs.values()):
                    raise ValueError("an output does not have one row per input row: cannot split it")
            except Exception as error:
                if len(batch) == 1:
                    _answer(batch[0].future, error=error)
                    return
                outputs = None
            if outputs is None:  # the merged call failed: each request alone, so only the faulty one fails
                for task in batch:
                    self._on_batch(task.rows)
                    try:
                        _answer(task.future, await loop.run_in_executor(self._threads.executor, self._call,
                                                                        task.inputs))
                    except Exception as error:
                        _answer(task.future, error=error)
                return
            if len(batch) == 1:
                _answer(batch[0].future, outputs)
                return
            start = 0
            for task in batch:
                _answer(task.future, {name: array[start:start + task.rows] for name, array in outputs.items()})
                start += task.rows
        finally:
            self._threads.slots.release()


def _answer(future: asyncio.Future, result=None, error: BaseException | None = None) -> None:
    if future.done():  # e.g. cancelled: the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
