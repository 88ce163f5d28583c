"""Stand-in for OffloadingConnectorStats (the payload get_stats returns)."""

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple


@dataclass
class OffloadingConnectorStats:
    data: Dict[str, Any] = field(default_factory=lambda: {"types": {}, "data": {}})

    def is_empty(self) -> bool:
        return not self.data["data"]

    def increase_counter(self, name: str, value: float = 1, labelvalues: Tuple[str, ...] = ()) -> None:
        self.data["types"].setdefault(name, "counter")
        values = self.data["data"].setdefault(name, {})
        values[labelvalues] = values.get(labelvalues, 0) + value

    def set_gauge(self, name: str, value: float, labelvalues: Tuple[str, ...] = ()) -> None:
        self.data["types"].setdefault(name, "gauge")
        self.data["data"].setdefault(name, {})[labelvalues] = value
