"""The LLM teacher's HTTP transport: one OpenAI-compatible ``/chat/completions`` POST, safe against a hostile
or broken endpoint.

The teacher sends an API key, so the transport must not hand it to anyone else, nor print it:

* redirects are refused, not followed. urllib would re-send ``Authorization`` to whatever origin a
  redirect names, and for a POST it turns 301/302/303 into a body-less GET, which can never be a valid
  chat-completions call anyway; a redirected API address is a configuration to fix, so the error names
  where the server pointed.
* every text that came from the server (error bodies, status reasons, odd payloads) goes through `redact`
  and is truncated before it reaches an exception message; exceptions are raised ``from None`` so a
  traceback does not print the server-controlled reason phrase of the original ``HTTPError`` either.
* the answer is read in chunks up to `max_bytes` (and within the request timeout), and its JSON is parsed
  with depth errors turned into `MalformedResponse`, so a huge or deeply nested answer is one bad
  attempt, never a hang or a crash.

Failures come in three kinds, which the teacher treats differently: `TransientTransportError` (retry
within the retry budget), `MalformedResponse` (a bad annotation attempt) and `EndpointError` (stop:
wrong URL, key or model).
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.request
from typing import Any, Iterable

SHOWN_CHARS = 300
"""At most this much server text goes into an exception message."""
_ERROR_BODY_BYTES = 8192  # read this much of an error body: a key cut by the read limit lies far beyond SHOWN_CHARS
_READ_CHUNK = 1 << 16

_SCHEME_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{6,}")
_ASSIGNED_CREDENTIAL = re.compile(
    r"""(?i)\b(api[_-]?key|access[_-]?token|token|secret|password|authorization)(["']?\s*[:=]\s*["']?)"""
    r"[A-Za-z0-9._~+/=-]{6,}"
)
_API_KEY_LIKE = re.compile(r"\b(sk|pk|rk|hf|gh[pousr]|xox[abp])[-_][A-Za-z0-9._-]{12,}")
_URL_USERINFO = re.compile(r"(?<=//)[^/@\s]+@")


class TransientTransportError(Exception):
    """The endpoint could not be reached or was temporarily unable to answer (timeout, refused, 429, 5xx)."""


class EndpointError(RuntimeError):
    """The endpoint answered in a way a retry cannot fix (4xx, a redirect): check base_url, model and key."""


class MalformedResponse(ValueError):
    """An answer that is not a usable chat-completions response (too large, not JSON, wrong shape)."""


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with the given secrets, bearer/basic credentials, API-key-like tokens and the user:password part
    of URLs replaced by ``[REDACTED]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    for credential in (_SCHEME_CREDENTIAL, _ASSIGNED_CREDENTIAL):
        text = credential.sub(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED]", text)
    text = _API_KEY_LIKE.sub("[REDACTED]", text)
    return _URL_USERINFO.sub("[REDACTED]@", text)


def shown(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Server text fit for an exception message: redacted first (so no key survives half-cut), then truncated."""
    text = redact(text, secrets)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + f"... [{len(text) - SHOWN_CHARS} more chars]"


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx code, handled in `post_chat_completion`


_OPENER = urllib.request.build_opener(_RefuseRedirects())


def post_chat_completion(
    url: str, body: dict[str, Any], api_key: str | None, timeout_s: float, max_bytes: int
) -> str:
    """POST `body` to `url` and return the first choice's message text.

    `timeout_s` bounds each socket operation and the whole read of the answer; `max_bytes` bounds its size.
    Raises `TransientTransportError`, `EndpointError` or `MalformedResponse`; no message holds `api_key`.
    """
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    secrets = (api_key,)
    deadline = time.monotonic() + timeout_s
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            raw = _read_bounded(response, max_bytes, deadline)
    except urllib.error.HTTPError as e:
        raise _http_error(url, e, secrets) from None
    except urllib.error.URLError as e:
        raise TransientTransportError(f"cannot reach {redact(url)}: {shown(str(e.reason), secrets)}") from None
    except (OSError, http.client.HTTPException) as e:  # timeouts, resets, a connection cut mid-answer
        raise TransientTransportError(f"connection to {redact(url)} failed: {shown(repr(e), secrets)}") from None
    try:
        payload = json.loads(raw.decode("utf-8"))
        content = payload["choices"][0]["message"]["content"]
    except RecursionError:
        raise MalformedResponse("the response is JSON nested too deeply to be a chat-completions answer") from None
    except (ValueError, KeyError, IndexError, TypeError):
        raise MalformedResponse(
            f"not a chat-completions response: {shown(raw.decode('utf-8', 'replace'), secrets)}") from None
    if content is None:
        return ""
    if not isinstance(content, str):
        raise MalformedResponse(f"message content is a {type(content).__name__}, not text")
    return content


def _read_bounded(response: Any, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise MalformedResponse(f"the response declares {int(declared)} bytes, over the {max_bytes}-byte limit")
    chunks, size = [], 0
    while True:
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise MalformedResponse(f"the response is over the {max_bytes}-byte limit (max_response_bytes)")
        if time.monotonic() > deadline:  # a server trickling bytes would never trip the per-read timeout
            raise TimeoutError("the response took longer than the request timeout to arrive")
        chunks.append(chunk)


def _http_error(url: str, error: urllib.error.HTTPError, secrets: tuple[str | None, ...]) -> Exception:
    try:
        body = error.read(_ERROR_BODY_BYTES).decode("utf-8", "replace")
    except OSError:
        body = ""
    finally:
        error.close()
    detail = shown(body, secrets) if body.strip() else shown(str(error.reason), secrets)
    if 300 <= error.code < 400:
        location = shown(error.headers.get("Location") or "(no Location header)", secrets)
        return EndpointError(
            f"{redact(url)} answered HTTP {error.code}, a redirect to {location}. Redirects are not followed, so "
            "the API key never goes to another address: set base_url to the endpoint's final address."
        )
    if error.code == 429 or error.code >= 500:
        return TransientTransportError(f"HTTP {error.code} from {redact(url)}: {detail}")
    return EndpointError(
        f"{redact(url)} answered HTTP {error.code}: {detail}. Check the model name, base_url and the API key."
    )
