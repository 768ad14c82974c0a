"""Sends an over-size body to one HTTP listener with httpx's async client (the client the
official A2A and MCP SDKs use), many times, in one go and in chunks, and counts the tries
that read the listener's refusal (its status, and for the Phase-1 route its seed-001 error
envelope) rather than a connection error.

    python refusals.py URL --status 413 [--tries 50] [--bytes 2097152] [--header K:V]...
        [--envelope INVALID_MESSAGE_FORMAT] [--chunk-delay-ms 0] [--chunk 65536]

Prints one JSON object: {"one_go": {"read": n, "tries": n, "errors": {...}},
"chunked": {...}}. Exits 0 whatever the counts (the caller decides what they must be).
"""

import argparse
import asyncio
import json
import sys

import httpx


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--status", type=int, required=True)
    p.add_argument("--tries", type=int, default=50)
    p.add_argument("--bytes", type=int, default=2 * 1024 * 1024)
    p.add_argument("--chunk", type=int, default=64 * 1024)
    p.add_argument("--chunk-delay-ms", type=int, default=0)
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--envelope", default=None,
                   help="the seed-001 error code the body must carry")
    p.add_argument("--modes", default="one_go,chunked")
    return p.parse_args()


def check(args, r):
    """Why the response is not the refusal expected, or None."""
    if r.status_code != args.status:
        return f"status {r.status_code}"
    if args.envelope is None:
        return None
    try:
        v = json.loads(r.content)
    except ValueError:
        return "body not JSON"
    if v.get("type") != "error" or v.get("payload", {}).get("error_code") != args.envelope:
        return "not the error envelope"
    if v.get("version") != "1.0.0":
        return "envelope version"
    return None


async def one(client, args, mode, body):
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    headers.setdefault("content-type", "application/json")
    if mode == "one_go":
        content = body
    else:
        async def chunks():
            for i in range(0, len(body), args.chunk):
                if args.chunk_delay_ms:
                    await asyncio.sleep(args.chunk_delay_ms / 1000)
                yield body[i:i + args.chunk]
        content = chunks()
    try:
        r = await client.post(args.url, content=content, headers=headers)
    except httpx.HTTPError as e:
        return type(e).__name__
    return check(args, r)


async def main():
    args = parse_args()
    body = b"x" * args.bytes
    out = {}
    timeout = httpx.Timeout(30.0)
    for mode in args.modes.split(","):
        errors = {}
        read = 0
        # A fresh client per mode; each refusal closes its connection, so every try
        # opens a new one.
        async with httpx.AsyncClient(timeout=timeout) as client:
            for _ in range(args.tries):
                why = await one(client, args, mode, body)
                if why is None:
                    read += 1
                else:
                    errors[why] = errors.get(why, 0) + 1
        out[mode] = {"read": read, "tries": args.tries, "errors": errors}
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
