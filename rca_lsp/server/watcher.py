"""Server-side watching of the paired dumps' folders, whether the client watches files or not.

A client reports the files its registered globs match: a rank folder moved away, or a dump folder renamed, is not a
`dump.json` event. So the server watches each dump root itself (watchdog): the root's whole tree (a rank or step
folder added, moved or deleted; a dump.json deleted and written again, as a rewrite does) and, without its
subfolders, the folder holding the root (the root renamed away and back). Watches are made off the event loop:
watchdog lists the tree when it schedules a recursive watch."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger(__name__)
DUMP_NAME = "dump.json"


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: "DumpWatcher") -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("modified", "created", "moved", "deleted", "closed"):
            for raw in (event.src_path, getattr(event, "dest_path", "")):
                if raw:
                    self.watcher.notify(Path(os.fsdecode(raw)), event.is_directory)


class DumpWatcher:
    def __init__(self, on_change: Callable[[Path], None]) -> None:
        self._on_change = on_change
        # read by the observer's thread without the lock, which watchdog holds while it dispatches an event and
        # takes to schedule a watch (under our lock): replaced whole, never changed in place
        self._roots: frozenset[Path] = frozenset()
        self._trees: dict[Path, tuple[ObservedWatch, tuple[int, int]]] = {}  # root -> its watch, the folder's identity
        self._parents: set[Path] = set()
        self._observer: BaseObserver | None = None
        self._lock = threading.Lock()

    def watch(self, roots: Iterable[Path]) -> None:
        """Watch these dump roots (resolved paths: a dump.json or a dump folder), once each; a root folder that was
        replaced (renamed away and another put in its place) is watched again."""
        with self._lock:
            for root in roots:
                self._roots = self._roots | {root}
                if root.parent not in self._parents and self._schedule(root.parent, recursive=False):
                    self._parents.add(root.parent)
                try:
                    info = root.stat()
                except OSError:
                    continue
                if not root.is_dir():
                    continue
                identity = (info.st_dev, info.st_ino)
                kept = self._trees.get(root)
                if kept is not None and kept[1] == identity:
                    continue
                if kept is not None and self._observer is not None:
                    self._observer.unschedule(kept[0])
                    del self._trees[root]
                watch = self._schedule(root, recursive=True)
                if watch is not None:
                    self._trees[root] = (watch, identity)

    def _schedule(self, folder: Path, recursive: bool) -> ObservedWatch | None:
        if self._observer is None:
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        try:
            return self._observer.schedule(_Handler(self), str(folder), recursive=recursive)
        except OSError as error:  # no such folder (yet), no permission, the system's limit of watches reached
            log.warning("cannot watch %s: %s", folder, error)
            return None

    def notify(self, path: Path, is_directory: bool) -> None:
        """A change below a root that can change what the dump is: a folder, a dump.json, or the root itself."""
        for root in self._roots:
            if path == root or (path.is_relative_to(root) and (is_directory or path.name == DUMP_NAME)):
                self._on_change(path)
                return

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
