"""YAML as people read it: no anchors/aliases, multi-line strings (config.pbtxt) as blocks; and as kubectl
reads it back (YAML 1.1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from tritonscale.api.manifests import KUBECTL_BOOLS


class Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> Any:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


Dumper.add_representer(str, _str_presenter)
# A string y, Y, n or N is quoted: kubectl reads YAML 1.1, where they are booleans (manifests.KUBECTL_BOOLS).
Dumper.add_implicit_resolver("tag:yaml.org,2002:bool", KUBECTL_BOOLS, list("yYnN"))


def dump(obj: Any, **kwargs: Any) -> str:
    text: str = yaml.dump(obj, Dumper=Dumper, sort_keys=False, **kwargs)  # no stream: a str
    return text


def dump_all(objs: Iterable[Any], **kwargs: Any) -> str:
    text: str = yaml.dump_all(objs, Dumper=Dumper, sort_keys=False, explicit_start=True, **kwargs)
    return text
