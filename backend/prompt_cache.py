"""The prompt-cache policy: which stored prefixes are kept, which go first, and what each one costs.

Kimi K3's linear-attention caches cannot be trimmed, so a stored cache only serves prompts it is an exact
prefix of (docs/engine.md). Entries have one of three kinds, given by where they were stored, never guessed
from their length:

- ``SYSTEM``: the end of a request's first segment (system prompt + tool schemas). Every request of that
  kind starts with it.
- ``CONTEXT``: the end of a later opening segment (a file's shared declarations). The units of one file
  start with it.
- ``CONTINUATION``: the end of a finished generation (prompt + generated tokens). The next round of the same
  conversation extends it token for token. It is used once (dropped when a request takes it) and released
  when its conversation ends, so the continuations stored are the ones a conversation is waiting for.

Only the system entries are shared between the people on one daemon. A file's context and a conversation's
continuation are kept per owner (the identity the daemon's gate gave the request's connection) and serve only
that owner: shared, how many prompt tokens were found cached (``cached_tokens``), or how fast a prompt was
read, would tell one person whether another audited a file with the very context they guess.

Eviction is strict: contexts first (least recently used; a hit counts as a use), then continuations, the
system entries last. An entry is stored as copies of its arrays: a slice of a batch's state would keep the
whole batch buffer alive while counting only its own bytes, so what the cache counts is what it holds.

Every rank of a tensor-parallel pair keeps its own cache and must take the same decisions: every choice
here depends only on the calls made and the entries' sizes, which are the same on every rank.
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models.cache import LRUPromptCache

# mlx-lm's names for the three kinds.
SYSTEM, CONTEXT, CONTINUATION = "system", "user", "assistant"
KIND_NAMES = {SYSTEM: "system", CONTEXT: "context", CONTINUATION: "continuation"}
EVICTION_ORDER = (CONTEXT, CONTINUATION, SYSTEM)


class _StrictOrder(LRUPromptCache.CacheOrder):
    """Evict the least recently used entry of the first kind in EVICTION_ORDER that has one."""

    def pop(self):
        for kind in self._ordering:
            if self._lrus[kind]:
                return self._lrus[kind].popleft()
        raise IndexError("the prompt cache is empty")


def held_copy(cache: list) -> list:
    """A new cache whose arrays are copies in buffers of their own (evaluated), sharing nothing with ``cache``."""
    out = [type(layer).from_state(tree_map(_copy, layer.state)) for layer in cache]
    mx.eval([x for layer in out for _, x in tree_flatten(layer.state) if isinstance(x, mx.array)])
    return out


def _copy(x):
    return mx.array(x) if isinstance(x, mx.array) else x


class PromptCache(LRUPromptCache):
    """mlx-lm's LRUPromptCache (a trie of token prefixes with an entry and byte bound) with the policy above.

    The trie's model key names a space: the model's own for system entries, (model, owner) for the others.
    """

    def __init__(self, max_size: int, max_bytes: int):
        super().__init__(max_size=max_size, max_bytes=max_bytes)
        self._lru = _StrictOrder(list(EVICTION_ORDER))

    def fetch(self, model: str, owner: str, tokens: list[int]) -> tuple[list | None, int]:
        """(a copy of the longest prefix stored for everyone or for ``owner``, its length), or (None, 0); marks
        the entry used."""
        space = max((model, (model, owner)), key=lambda space: self._stored_prefix(space, tokens))
        cache, rest = self.fetch_nearest_cache(space, tokens)
        if cache is None:
            return None, 0
        hit = len(tokens) - len(rest)
        key = tokens[:hit]
        kind = self._trie.get(space, key).cache_type
        if kind == CONTINUATION:
            self._drop(space, key)
        else:
            self._lru.remove(space, key)
            self._lru.push(space, key, kind)
        return cache, hit

    def store(self, model: str, owner: str, tokens: list[int], cache: list, kind: str) -> None:
        """Keep a copy of ``cache`` (the state after ``tokens``) as an entry of ``kind``, evicting to fit."""
        space = model if kind == SYSTEM else (model, owner)
        self.insert_cache(space, list(tokens), held_copy(cache), cache_type=kind)

    def drop(self, model: str, owner: str, tokens: list[int]) -> bool:
        """Forget ``owner``'s entry stored at exactly ``tokens`` (a continuation); False when there is none."""
        return self._drop((model, owner), tokens)

    def _drop(self, space, tokens: list[int]) -> bool:
        try:
            entry = self._trie.pop(space, tokens)
        except KeyError:
            return False
        self._lru.remove(space, tokens)
        self._n_bytes -= entry.nbytes
        self._n_bytes_by_type[entry.cache_type] -= entry.nbytes
        return True

    def _stored_prefix(self, space, tokens: list[int]) -> int:
        """The length of the longest prefix of ``tokens`` with an entry in ``space`` (0: none)."""
        found = self._trie.search(space, tokens)
        return len(found.exact if found.exact is not None else found.shorter or [])

    def clear(self) -> None:
        self.trim_to(n_sequences=0)

    def kinds(self) -> dict[str, dict[str, int]]:
        """Entries and bytes per kind, under the names docs/engine.md uses."""
        return {KIND_NAMES[k]: v for k, v in self.stats_by_type().items()}
