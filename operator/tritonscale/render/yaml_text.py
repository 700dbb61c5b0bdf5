"""YAML as people read it: no anchors/aliases, multi-line strings (config.pbtxt) as blocks; and as kubectl
reads it back (its YAML 1.1 with Go's numbers: manifests.kubectl_tag)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from tritonscale.api.manifests import kubectl_tag


class Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        """A string is written plain only where both kubectl and PyYAML read it back as a string:
        ``value: 1e-3`` (an env value) is a number to kubectl, which then refuses the Deployment;
        ``y`` a boolean (manifests.kubectl_tag)."""
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        if kind is yaml.ScalarNode and implicit[0] and tag == "tag:yaml.org,2002:str":
            return kubectl_tag(value)
        return tag


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> Any:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


Dumper.add_representer(str, _str_presenter)


def dump(obj: Any, **kwargs: Any) -> str:
    text: str = yaml.dump(obj, Dumper=Dumper, sort_keys=False, **kwargs)  # no stream: a str
    return text


def dump_all(objs: Iterable[Any], **kwargs: Any) -> str:
    text: str = yaml.dump_all(objs, Dumper=Dumper, sort_keys=False, explicit_start=True, **kwargs)
    return text
