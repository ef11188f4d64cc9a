"""An independent streaming decode client, to hold the harness's own figures against.

It shares no code with harness/bench: plain aiohttp (not a harness dependency: the H200
machine has it; elsewhere `pip install aiohttp`) against /v1/completions, streaming, temperature
0, ignore_eos, one fixed prompt generator. `harness run --cross-check` runs it against each ready
server with HARNESS_URL, HARNESS_MODEL and HARNESS_OUT set:

  harness run -m MATRIX --cross-check 'python3 tools/stream_bench.py $HARNESS_URL $HARNESS_MODEL $HARNESS_OUT'

usage: stream_bench.py URL MODEL OUTJSON   (warm-up at 2, 8, 64; then c=1 x3, c=8 x3, c=64 x1)
"""

import asyncio
import json
import random
import sys
import time

import aiohttp

WORDS = ("the of to a in is and for that this be with as on if not it by from are an or "
         "return tensor shape model layer config value none self type list int str dict "
         "kernel backend cache block size weight batch token request output input").split()


def prompt(rng, n=128):
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def one(sess, url, model, rng, max_tokens=256):
    body = {"model": model, "prompt": prompt(rng), "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    tfirst, chunks, usage = None, 0, None
    async with sess.post(url + "/v1/completions", json=body) as r:
        if r.status != 200:
            return {"error": r.status, "body": (await r.text())[:2000]}
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("choices"):
                chunks += 1
                if tfirst is None:
                    tfirst = time.perf_counter()
            if ev.get("usage"):
                usage = ev["usage"]
    t1 = time.perf_counter()
    ntok = usage["completion_tokens"] if usage else chunks
    return {"ttft_s": tfirst - t0, "e2e_s": t1 - t0, "completion_tokens": ntok, "chunks": chunks,
            "decode_tok_s": (ntok - 1) / (t1 - tfirst) if ntok > 1 and tfirst else None}


async def level(url, model, rng, conc, rounds=1):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as sess:
        t0 = time.perf_counter()
        res = []
        for _ in range(rounds):
            res += await asyncio.gather(*[one(sess, url, model, rng) for _ in range(conc)])
        wall = time.perf_counter() - t0
    ok = [r for r in res if "error" not in r]
    rates = sorted(r["decode_tok_s"] for r in ok if r.get("decode_tok_s") is not None)
    ttfts = sorted(r["ttft_s"] for r in ok)
    return {"concurrency": conc, "rounds": rounds, "n_ok": len(ok), "n_err": len(res) - len(ok),
            "errors": [r for r in res if "error" in r][:2], "wall_s": wall,
            "aggregate_tok_s": sum(r["completion_tokens"] for r in ok) / wall if wall else None,
            "median_per_stream_decode_tok_s": rates[len(rates) // 2] if rates else None,
            "median_ttft_s": ttfts[len(ttfts) // 2] if ttfts else None, "per_request": ok}


async def main(url, model, out_path):
    rng = random.Random(0)
    out = {}
    for name, conc, rounds in (("warmup", 2, 1), ("warmup_c8", 8, 1), ("warmup_c64", 64, 1),
                               ("c1", 1, 3), ("c8", 8, 3), ("c64", 64, 1)):
        out[name] = await level(url, model, rng, conc, rounds)
    for k, v in out.items():
        print(k, {x: v[x] for x in v if x != "per_request"}, flush=True)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
