"""Secret redaction for command lines, argument vectors, environments and free text.

Observability output is a sensitive artifact (ExecWeave section VI-C): a command line or an
environment routinely carries passwords, tokens and API keys. Everything the host receiver emits
about a process goes through here first, and the ``redact`` processor applies the same rules to
span and log attributes.

What is redacted (the secret is replaced by :data:`REDACTED`, the rest is kept so the command
stays recognisable):

* option values of secret-looking options: ``--password x``, ``--token=x``, ``-p`` is *not*
  treated as secret (too ambiguous); a bare ``--key`` keeps a value shaped like a ``sort`` key
  definition (``--key 2``, ``--key=1,1n``), anything else it is given is hidden;
* ``NAME=value`` assignments (in argv, text and environments) whose name looks secret
  (``*_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``, ``*PASSWD*``, ``*CREDENTIAL*``, ...);
* ``Authorization: Bearer x`` / ``Basic x`` header values;
* credentials in URLs (``scheme://user:pass@host`` keeps ``user``);
* well-known key shapes anywhere: OpenAI/Anthropic ``sk-...``, GitHub ``ghp_``/``gho_``/
  ``github_pat_...``, AWS ``AKIA...``, Slack ``xox?-...``, Google ``AIza...``, JWTs;
* tool-specific options, only for the tool that gives them that meaning: ``curl -u``/``--user``/
  ``--proxy-user user:pass`` (the user is kept), ``mysql -pPW`` (attached only: a detached
  ``-p`` prompts and the next word is the database), ``sshpass -p PW``; ``-p`` stays a port for
  ``ssh``, ``nc`` and everything else. In text, a quoted part holding a command (JSON
  arguments, ``sh -c '...'``) is checked as a command line, and a word naming a ``mysql``-family
  tool starts a command (``Command '['sh', '-c', 'mysql -pPW db']' returned 1``);
* SQL: the quoted secret after ``PASSWORD`` or ``IDENTIFIED [WITH plugin] BY`` (``CREATE USER
  ... PASSWORD 'x'``, ``... IDENTIFIED BY 'x'``, ``SET PASSWORD = PASSWORD('x')``).

The rules, the tools they apply to and an example of each are in ``docs/redaction.md``. Every
function here is total (it never raises on any string) and idempotent (redacting twice gives the
same result as once).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

REDACTED = "[REDACTED]"

_SECRET_NAME = re.compile(
    r"(?:^|[_\-.])(?:KEY|APIKEY|API_KEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD|CREDENTIALS?|"
    r"AUTH|COOKIE|SIGNATURE)(?:$|[_\-.])|SECRET|PASSWORD|PASSWD|"
    r"APIKEY|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL",
    re.IGNORECASE,
)
"""A name (environment variable, option, attribute key) whose value is a secret."""

_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "KEYMAP"})

_SECRET_OPTION = re.compile(
    r"^--?(?:[a-z0-9]+[-_])*(?:password|passwd|pass|token|secret|api[-_]?key|key|"
    r"access[-_]key|secret[-_]key|private[-_]key|auth|credentials?|client[-_]secret)$",
    re.IGNORECASE,
)

_SORT_KEYDEF = re.compile(r"\d+(?:\.\d+)?[bdfgiMhnRrV]*(?:,\d+(?:\.\d+)?[bdfgiMhnRrV]*)?")
"""A ``sort`` key definition (``F[.C][OPTS][,F[.C][OPTS]]``): what ``--key 2`` usually means."""

_KEY_SHAPES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
)

_AUTH_HEADER = re.compile(
    r"(?P<head>\b(?:Proxy-)?Authorization[\"']?\s*[:=]\s*[\"']?\s*"
    r"(?:Bearer|Basic|Token|Digest|Bot)?\s*)"
    r"(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/\-=]{8,})")
_URL_CREDENTIALS = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:)(?P<value>[^\s/]+)(?P<tail>@)"
)
"""``scheme://user:secret@``: the secret runs to the last ``@`` before the path (it may hold an
unescaped ``@`` itself)."""
_QUERY_PARAMETER = re.compile(
    r"(?P<head>[?&;](?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=)(?P<value>[^\s&#;\"']+)"
)
"""A URL query parameter (``?access_token=x``): its value is hidden when its name is secret."""
_ASSIGNMENT = re.compile(
    r"(?P<head>(?<![A-Za-z0-9_])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)[\"']?\s*[=:]\s*[\"']?)"
    r"(?P<value>[^\s\"'&;,]+)"
)
_OPTION_EQUALS = re.compile(
    r"(?P<head>(?<!\S)(?P<opt>--?[A-Za-z0-9][A-Za-z0-9_\-]*)=)(?P<value>\S+)"
)
_OPTION_SPACE = re.compile(
    r"(?P<head>(?<!\S)(?P<opt>--?[A-Za-z0-9][A-Za-z0-9_\-]*)\s+)(?P<value>[^\s\-]\S*)"
)


_SQL_SECRET = re.compile(
    r"(?P<head>\b(?:PASSWORD(?:\s*=\s*|\s*\(\s*|\s+)|IDENTIFIED\s+(?:WITH\s+\w+\s+)?BY\s+)"
    r"(?:PASSWORD\s*\(\s*)?(?P<q>['\"]))(?P<value>[^'\"]*)(?P=q)",
    re.IGNORECASE,
)
"""A quoted SQL password: ``PASSWORD 'x'``, ``IDENTIFIED BY 'x'``, ``PASSWORD('x')``."""

_TOOL_HINT = re.compile(r"\b(?:curl|mysql|mariadb|sshpass)")
"""Text that may hold a tool-specific secret option (a cheap test before tokenizing)."""
_CURL_USER_OPTIONS = ("--user", "--proxy-user", "-u", "-U")
_MYSQL_TOOLS = frozenset(
    {
        "mysql",
        "mysqldump",
        "mysqladmin",
        "mysqlimport",
        "mysqlshow",
        "mysqlcheck",
        "mysqlslap",
        "mysqlpump",
        "mariadb",
        "mariadb-dump",
        "mariadb-admin",
    }
)
_WRAPPERS = frozenset({"sudo", "env", "exec", "nohup", "time", "command", "xargs"})
_SCRIPT_HOSTS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
"""Shells that run a script named by their first word: ``sh /opt/bin/mysql -pPW`` is what the
kernel runs for a ``#!/bin/sh`` script called ``mysql``, so the script's name is the tool."""
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})
_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s'"]|['"])+""")
"""A shell word: quoted parts may hold spaces (an unbalanced quote is an ordinary character)."""


_TOOL_START = re.compile(r"[(`\[{,'\"]")
"""What may precede a command's first word inside a text word: ``(mysql``, ``$(mysql``,
```mysql``, and a quoted list's item (``['sh', '-c', 'mysql``)."""
_CLOSERS = re.compile(r"""['"\])}`,]*$""")
"""Closing quotes and brackets that end a text word after an attached value (``-pPW']``)."""
_QUOTED = re.compile(r"'(?P<s>[^']*)'|\"(?P<d>[^\"]*)\"")


def _tool_name(token: str) -> str:
    return _TOOL_START.split(_CLOSERS.sub("", token.strip("'\"")))[-1].rsplit("/", 1)[-1]


def _attached(token: str, *, text: bool) -> str:
    """``-pPW`` (an attached password) as ``-p[REDACTED]``; in a text word, the closing quotes
    and brackets after the value are kept (``-pPW']`` gives ``-p[REDACTED]']``)."""
    if token.startswith("-p" + REDACTED):
        return token
    tail = _CLOSERS.search(token[2:]) if text else None
    kept = tail[0] if tail is not None and tail.start() > 0 else ""
    return "-p" + REDACTED + kept


def _user_password(value: str) -> str:
    """``user:secret`` as ``user:[REDACTED]`` (quotes kept); a value without a secret as is."""
    quote = value[0] if value[:1] in ("'", '"') else ""
    body = value[len(quote) :]
    end = quote if quote and body.endswith(quote) and len(body) > 0 else ""
    body = body[: len(body) - len(end)]
    user, sep, secret = body.partition(":")
    if not sep or not secret:
        return value
    return f"{quote}{user}:{REDACTED}{end}"


def _curl_option(tokens: Sequence[str], i: int, out: dict[int, str]) -> None:
    token = tokens[i]
    for option in _CURL_USER_OPTIONS:
        if token == option and i + 1 < len(tokens):
            out[i + 1] = _user_password(tokens[i + 1])
        elif option.startswith("--") and token.startswith(option + "="):
            out[i] = option + "=" + _user_password(token[len(option) + 1 :])
        elif not option.startswith("--") and token.startswith(option) and len(token) > 2:
            out[i] = option + _user_password(token[2:])
        else:
            continue
        return


def tool_redactions(tokens: Sequence[str], *, text: bool = False) -> dict[int, str]:
    """Replacements, by index, that the tool-specific rules make in one command's words.

    ``tokens[0]`` (after ``NAME=value`` assignments and wrappers such as ``sudo`` or ``env``,
    and past a shell running a script: ``sh /opt/bin/mysql ...``) names the tool; only
    ``curl``, the ``mysql`` family and ``sshpass`` have rules. ``sshpass`` runs a command: its
    options end at the first word that is not one, and the rest is checked as a command of its
    own (so ``sshpass -p PW ssh -p 22 host`` keeps the port). ``text``: the tokens are words of
    a text (:func:`_redact_commands`), so a value may end in closing quotes or brackets.
    """
    start = 0
    while start < len(tokens) and ("=" in tokens[start] or _tool_name(tokens[start]) in _WRAPPERS):
        start += 1
    if start >= len(tokens):
        return {}
    if (
        _tool_name(tokens[start]) in _SCRIPT_HOSTS
        and start + 1 < len(tokens)
        and not tokens[start + 1].startswith("-")
    ):
        start += 1
    tool = _tool_name(tokens[start])
    out: dict[int, str] = {}
    i = start + 1
    while i < len(tokens):
        token = tokens[i]
        if tool == "curl":
            _curl_option(tokens, i, out)
        elif tool in _MYSQL_TOOLS:
            body = token.lstrip("'\"") if text else token  # a quoted list's item: '-pPW',
            if body.startswith("-p") and len(body) > 2:
                out[i] = token[: len(token) - len(body)] + _attached(body, text=text)
        elif tool == "sshpass":
            if token == "-p" and i + 1 < len(tokens):
                out[i + 1] = REDACTED
                i += 1
            elif token.startswith("-p") and len(token) > 2:
                out[i] = _attached(token, text=text)
            elif not token.startswith("-"):
                rest = tool_redactions(tokens[i:], text=text)
                out.update({i + k: v for k, v in rest.items()})
                break
        i += 1
    return out


def _redact_commands(text: str) -> str:
    """``text`` (a shell command line, or text quoting one) with the tool-specific rules applied
    to each command: a command starts at the text's first word, after a separator, or at a word
    naming a ``mysql``-family tool (``Command '['sh', '-c', 'mysql -pPW db']' failed``); a
    quoted part holding a command (``{"command": "mysql -pPW db"}``, ``sh -c 'mysql -pPW'``) is
    checked as a command line of its own."""
    words = list(_WORD.finditer(text))
    found: dict[int, str] = {}
    command: list[int] = []
    for k, word in enumerate([*words, None]):
        if word is not None and word[0] not in _SEPARATORS:
            command.append(k)
            if not word[0].endswith(";"):
                continue
        tokens = [words[c][0] for c in command]
        rules = tool_redactions(tokens, text=True)
        for j in range(1, len(tokens)):
            if _tool_name(tokens[j]) in _MYSQL_TOOLS:
                later = tool_redactions(tokens[j:], text=True)
                rules.update({j + i: v for i, v in later.items() if j + i not in rules})
        found.update({command[i]: v for i, v in rules.items()})
        command = []
    for k, word in enumerate(words):
        if k not in found and _TOOL_HINT.search(word[0]) and _QUOTED.search(word[0]):
            inner = _QUOTED.sub(_quoted_command, word[0])
            if inner != word[0]:
                found[k] = inner
    pieces: list[str] = []
    done = 0
    for k in sorted(found):
        pieces += [text[done : words[k].start()], found[k]]
        done = words[k].end()
    pieces.append(text[done:])
    return "".join(pieces)


def _quoted_command(m: re.Match[str]) -> str:
    """A quoted part of a word with the tool rules applied to what it quotes."""
    quote = "'" if m["s"] is not None else '"'
    inside = m["s"] if m["s"] is not None else m["d"]
    if not _TOOL_HINT.search(inside) or not any(c.isspace() for c in inside):
        return m[0]
    return quote + _redact_commands(inside) + quote


def is_secret_name(name: str) -> bool:
    """True when a variable, option or attribute named ``name`` holds a secret."""
    bare = name.lstrip("-").upper()
    if bare in _NOT_SECRET_NAMES:
        return False
    return bool(_SECRET_NAME.search(bare.replace("-", "_")))


def _norm(name: str) -> str:
    return name.lstrip("-").upper().replace("-", "_")


def _is_secret_option(option: str) -> bool:
    return bool(_SECRET_OPTION.match(option))


_TRIGGER = re.compile("|".join([r"[=:\s'\"]", *(p.pattern for p in _KEY_SHAPES)]))
"""Text without a match here is left unchanged by every built-in rule: each rule needs an
``=``, a ``:``, whitespace or a quote (the tool rules need two words, the SQL rule a quote, URL
credentials ``://``, headers, assignments and query parameters ``:`` or ``=``, options ``=`` or
whitespace), except the key shapes, which are part of this pattern."""
_WORD_NUMBER = re.compile(r"([A-Za-z][A-Za-z0-9]*):[0-9]+")
"""``linux:4711`` (a record id): whether a rule changes it depends on the word only (a secret
name or ``authorization`` before the colon, or a word shaped like a key), never on the digits;
see :meth:`Redactor.text`."""
_CACHE_SIZE = 8192
"""Distinct texts whose redacted form a :class:`Redactor` remembers (it starts over when full)."""
_CACHE_LONGEST = 1024
"""Longer texts are not remembered (a command line or a prompt is rarely seen twice)."""


class Redactor:
    """Applies the built-in rules plus optional extra patterns and secret names.

    ``extra_patterns`` are regular expressions whose whole match is replaced; ``extra_names`` are
    additional variable/option/attribute names (case-insensitive) whose values are secrets.

    The rules are a pure function of the text, so :meth:`text` remembers the result for recent
    distinct texts (an OS event stream repeats the same paths and times thousands of times), and
    a text none of the rules could match (no ``=``, ``:``, whitespace, quote or key shape) is
    returned at once, when no extra pattern is configured; so is ``word:N`` (a record id) once
    ``word:0`` is known to pass unchanged.
    """

    def __init__(self, extra_patterns: Iterable[str] = (), extra_names: Iterable[str] = ()) -> None:
        self._extra = tuple(re.compile(p) for p in extra_patterns)
        self._names = frozenset(_norm(n) for n in extra_names)
        self._cache: dict[str, str] = {}
        self._names_seen: dict[str, bool] = {}
        self._plain_words: dict[str, bool] = {}

    def secret_name(self, name: str) -> bool:
        """True when ``name`` names a secret under the built-in or extra rules."""
        known = self._names_seen.get(name)
        if known is None:
            known = _norm(name) in self._names or is_secret_name(name)
            if len(self._names_seen) >= _CACHE_SIZE:
                self._names_seen.clear()
            self._names_seen[name] = known
        return known

    def text(self, text: str) -> str:
        """``text`` with every recognised secret replaced by :data:`REDACTED`."""
        if not text:
            return text
        done = self._cache.get(text)
        if done is not None:
            return done
        if self._extra:
            out = self._rules(text)
        else:
            word = _WORD_NUMBER.fullmatch(text)
            if word is not None and self._plain_word(word[1]):
                return text  # a record id: seen once, so not remembered
            out = text if _TRIGGER.search(text) is None else self._rules(text)
        if len(text) <= _CACHE_LONGEST:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[text] = out
        return out

    def remembered(self, text: str) -> str | None:
        """:meth:`text` of ``text`` when it is remembered, else None (a shortcut for callers
        redacting many values: a hit costs one lookup)."""
        return self._cache.get(text)

    def _plain_word(self, word: str) -> bool:
        """True when no rule changes ``word:N`` for any number N (decided once per word)."""
        plain = self._plain_words.get(word)
        if plain is None:
            probe = f"{word}:0"
            plain = self._rules(probe) == probe
            if len(self._plain_words) >= _CACHE_SIZE:
                self._plain_words.clear()
            self._plain_words[word] = plain
        return plain

    def _rules(self, text: str) -> str:
        """``text`` through every rule (:meth:`text` without the shortcuts)."""
        out = _redact_commands(text) if _TOOL_HINT.search(text) else text
        out = _SQL_SECRET.sub(lambda m: m["head"] + REDACTED + m["q"], out)
        out = _URL_CREDENTIALS.sub(lambda m: m["head"] + REDACTED + m["tail"], out)
        out = _AUTH_HEADER.sub(lambda m: m["head"] + REDACTED, out)
        out = _BEARER.sub(lambda m: m["head"] + REDACTED, out)
        out = _QUERY_PARAMETER.sub(
            lambda m: m["head"] + REDACTED if self.secret_name(m["name"]) else m[0], out
        )
        out = _ASSIGNMENT.sub(self._assignment, out)
        out = _OPTION_EQUALS.sub(
            lambda m: m["head"] + REDACTED if self._hides(m["opt"], m["value"]) else m[0], out
        )
        out = _OPTION_SPACE.sub(
            lambda m: m["head"] + REDACTED if self._hides(m["opt"], m["value"]) else m[0], out
        )
        for pattern in (*_KEY_SHAPES, *self._extra):
            out = pattern.sub(REDACTED, out)
        return out

    def _assignment(self, m: re.Match[str]) -> str:
        if not self.secret_name(m["name"]):
            return m[0]
        start = m.start()
        if m["name"].upper() == "KEY" and start and m.string[start - 1] == "-":
            return m[0]  # the option --key=...: the option rules decide (see _hides)
        return m["head"] + REDACTED

    def _option(self, option: str) -> bool:
        return _is_secret_option(option) or _norm(option) in self._names

    def _hides(self, option: str, value: str) -> bool:
        """Whether ``value``, given to ``option``, is hidden."""
        if not self._option(option):
            return False
        # A bare --key is as often sort's field number as a secret: only that shape stays.
        return not (
            _norm(option) == "KEY"
            and "KEY" not in self._names
            and _SORT_KEYDEF.fullmatch(value) is not None
        )

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A redacted copy of an argument vector; a secret option's next argument is hidden."""
        out: list[str] = []
        hide_next = False
        by_tool = tool_redactions(argv)
        for i, arg in enumerate(argv):
            if i in by_tool:
                out.append(self.text(by_tool[i]))
                hide_next = False
                continue
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            if arg.startswith("-") and "=" not in arg and self._option(arg):
                out.append(arg)
                hide_next = i + 1 < len(argv) and self._hides(arg, argv[i + 1])
                continue
            out.append(self.text(arg))
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A redacted copy of an environment: secret-named values hidden, others scanned."""
        return {
            name: REDACTED if self.secret_name(name) else self.text(value)
            for name, value in env.items()
        }


_DEFAULT = Redactor()


def redact_text(text: str) -> str:
    """``text`` with secrets replaced (built-in rules)."""
    return _DEFAULT.text(text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A redacted copy of ``argv`` (built-in rules)."""
    return _DEFAULT.argv(argv)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A redacted copy of ``env`` (built-in rules)."""
    return _DEFAULT.env(env)
