"""Where a decode step of the sampler goes: ms per step at batch 8, then torch.profiler's table by self CPU time.

    python bench/decode_profile.py          # ms per decode step (prefill excluded: (t(80) - t(16)) / 64), twice
    python bench/decode_profile.py --prof   # and the profile of one rollout of 48 forced tokens

The embedded model with a fresh (zero) Coder adapter, one training problem, 8 samples at temperature 0.7 and
top-p 0.95, every row forced to the full length, inside cpu_linear.sampling_weights as rollout.sample runs it
(docs/speed.md, the decode profile).
"""
import sys, time, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import models, data, coder, rollout, decode
from cpu_linear import sampling_weights
torch.manual_seed(0)
base, tok = models.load_base(models.EMBEDDED, "cpu", "none", "auto")
policy = models.add_role_adapters(base, models.ROLES, 16, 32)
policy.set_adapter("coder"); policy.eval()
p = data.load("train")[0]
enc = rollout.encode_prompts(tok, [coder.messages(p, None)], "cpu")
@torch.no_grad()
def run(T):
    with sampling_weights(policy, 8):
        return decode.decode(policy, enc.input_ids, enc.attention_mask, 8, T, tok.eos_token_id, 0.7, 0.95, T)
run(8)
for rep in range(2):
    s = {}
    for T in (16, 80):
        t = time.perf_counter(); run(T); s[T] = time.perf_counter() - t
    print("ms/step", 1000 * (s[80] - s[16]) / 64, flush=True)
if "--prof" in sys.argv:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(48)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
