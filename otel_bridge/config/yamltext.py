"""YAML text to Python values for :mod:`otel_bridge.config.loader`: duplicate keys refused, sizes
and nesting bounded. Apart from the loader so that PyYAML is imported only when a configuration
text is parsed (``observe`` without ``-c`` builds its whole configuration from a typed overlay)."""

from __future__ import annotations

from typing import Any

import yaml

from otel_bridge.config.env import join_path
from otel_bridge.config.loader import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_NODES
from otel_bridge.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key repeated in one mapping (PyYAML keeps the last),
    and turns a value its tag cannot hold (``!!float abc``) into an error at that node."""

    paths: dict[int, str]

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 (PyYAML's name)
        # PyYAML's scanner slows quadratically with flow nesting: stop before it matters
        if self.flow_level >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested deeper than {MAX_DEPTH}", self.get_mark()
            )
        super().fetch_flow_collection_start(TokenClass)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} cannot be a key", key_node.start_mark
                ) from None
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            where = self.paths.get(id(node), "")
            value = str(node.value)[:40] if isinstance(node, yaml.ScalarNode) else "..."
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{where + ': ' if where else ''}{node.tag.rpartition(':')[2]} value "
                f"{value!r} is not valid ({str(exc)[:80]})",
                node.start_mark,
            ) from None


def _children(node: yaml.Node, path: str) -> list[tuple[yaml.Node, str]]:
    if isinstance(node, yaml.MappingNode):
        out: list[tuple[yaml.Node, str]] = []
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "<key>"
            out += [(k, path), (v, join_path(path, str(name)[:60]))]
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
    return []


def check_nodes(root: yaml.Node, origin: str) -> dict[int, str]:
    """Refuse a composed document that is cyclic, nested deeper than :data:`MAX_DEPTH` or
    expands past :data:`MAX_NODES`; returns each node's first key path (for messages).

    Aliases are counted at every use, with the counts memoized per node, so a "billion laughs"
    document is refused after visiting each distinct node once.
    """
    paths: dict[int, str] = {}
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, str, int, bool]] = [(root, "", 1, False)]
    while stack:
        node, path, depth, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            size[key] = 1 + sum(size[id(c)] for c, _ in _children(node, path))
            if size[key] > MAX_NODES:
                raise ConfigError(
                    [
                        f"{origin}: {path or '<root>'}: expands to more than {MAX_NODES} values "
                        "(aliases counted at each use)"
                    ]
                )
            continue
        if key in active:
            raise ConfigError([f"{origin}: {path or '<root>'}: an alias refers to itself"])
        if key in size:
            continue
        if depth > MAX_DEPTH:
            raise ConfigError([f"{origin}: {path or '<root>'}: nested deeper than {MAX_DEPTH}"])
        paths.setdefault(key, path)
        active.add(key)
        stack.append((node, path, depth, True))
        stack.extend((c, p, depth + 1, False) for c, p in _children(node, path))
    return paths


def load_yaml(text: str, origin: str) -> Any:
    """Parse YAML text; ConfigError with line and column when it is malformed.

    Bounded: :data:`MAX_CONFIG_BYTES`, :data:`MAX_DEPTH`, :data:`MAX_NODES` (see
    :func:`check_nodes`); every failure is a :class:`ConfigError`, never a traceback.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{origin}: larger than {MAX_CONFIG_BYTES} bytes"])
    loader: _UniqueKeyLoader | None = None
    try:
        loader = _UniqueKeyLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        loader.paths = check_nodes(node, origin)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError([f"{origin}:{where}: invalid YAML: {exc.problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{origin}: invalid YAML: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{origin}: nested too deeply to read"]) from None
    finally:
        if loader is not None:
            loader.dispose()
