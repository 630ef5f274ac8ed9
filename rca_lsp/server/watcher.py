"""Server-side watching of dumps that lie outside the workspace (clients only report workspace files)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: "DumpWatcher") -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("modified", "created", "moved", "deleted", "closed"):
            for raw in (event.src_path, getattr(event, "dest_path", "")):
                if raw:
                    self.watcher.notify(Path(str(raw)))


class DumpWatcher:
    def __init__(self, on_change: Callable[[Path], None]) -> None:
        self._on_change = on_change
        self._files: set[Path] = set()
        self._folders: set[Path] = set()
        self._observer: BaseObserver | None = None
        self._lock = threading.Lock()

    def watch(self, dumps: Iterable[Path], workspace_folders: Iterable[Path]) -> None:
        roots = list(workspace_folders)
        with self._lock:
            for dump in dumps:
                dump = dump.resolve()
                if dump in self._files or any(dump.is_relative_to(root) for root in roots):
                    continue
                self._files.add(dump)
                if dump.parent not in self._folders:
                    self._folders.add(dump.parent)
                    if self._observer is None:
                        self._observer = Observer()
                        self._observer.daemon = True
                        self._observer.start()
                    self._observer.schedule(_Handler(self), str(dump.parent), recursive=False)

    def notify(self, path: Path) -> None:
        resolved = path.resolve()
        if resolved in self._files:
            self._on_change(resolved)

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
