"""The RL task re-derived from docs/rl-reward.md alone (xxHash through ctypes, no Holdfast code), and
compared with what holdfast-reward --emit writes: 3000 train prompts with their preference pairs, and
every held-out prompt of add2. Usage: task_reference_test.py PATH/TO/holdfast-reward"""
import ctypes, json, os, struct, subprocess, sys, tempfile
lib = ctypes.CDLL("libxxhash.so.0")
lib.XXH3_64bits_withSeed.restype = ctypes.c_uint64
lib.XXH3_64bits_withSeed.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
def H(words, seed):
    b = b"".join(struct.pack("<q", w) if w < 0 else struct.pack("<Q", w) for w in words)
    return lib.XXH3_64bits_withSeed(b, len(b), seed)
kSplit, kOrder, kTrain, kReject = 0x686f6c6466617374, 0x6576616c6f726465, 0x747261696e696478, 0x72656a6563746564
mn, mx, k, pct = 0, 99, 2, 10
R = mx - mn + 1; N = R ** k
def ops(t):
    o = []
    for _ in range(k):
        o.append(mn + t % R); t //= R
    return o[::-1]
held = lambda o: H(o, kSplit) % 100 < pct
scale = lambda h, n: (h * n) >> 64
evl = sorted((H(ops(t), kOrder), t) for t in range(N) if held(ops(t)))
evl = [t for _, t in evl]
def train(i):
    t = 0
    for a in range(64):
        t = scale(H([i, a], kTrain), N)
        if not held(ops(t)): return t
    while held(ops(t)): t = (t + 1) % N
    return t
def prompt(t): o = ops(t); return "+".join(map(str, o)) + "=", str(sum(o))
def rejected(i, split, ans):
    s = int(ans); w = []
    for v in (s+1, s-1, s+10, s-10):
        if v >= 0 and v != s: w.append(str(v))
    for j in ([len(ans)-2] if len(ans) >= 2 else [len(ans)]) + [0]:
        if j + 1 >= len(ans) or ans[j] == ans[j+1]: continue
        sw = list(ans); sw[j], sw[j+1] = sw[j+1], sw[j]; sw = "".join(sw)
        if (len(sw) == 1 or sw[0] != "0") and sw not in w: w.append(sw)
    return w[scale(H([i, split], kReject), len(w))] + "\n"
bin = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="rl_task_reference_")
pref_path, eval_path = os.path.join(tmp, "pref.jsonl"), os.path.join(tmp, "eval.jsonl")
subprocess.run([bin, "--task", "add2", "--emit", "preference", "--count", "3000", "--out", pref_path],
               check=True, capture_output=True)
subprocess.run([bin, "--task", "add2", "--emit", "eval", "--count", str(len(evl)), "--out", eval_path],
               check=True, capture_output=True)
for i, line in enumerate(open(pref_path, encoding="utf-8")):
    d = json.loads(line); p, a = prompt(train(i))
    assert d["prompt"] == p and d["chosen"] == a + "\n" and d["rejected"] == rejected(i, 0, a), (i, d, p, a)
for j, line in enumerate(open(eval_path, encoding="utf-8")):
    d = json.loads(line); p, a = prompt(evl[j])
    assert d["prompt"] == p and d["response"] == a + "\n", (j, d, p)
print("ok: 3000 preference lines and", len(evl), "eval lines match the documented definition")
os.remove(pref_path)
os.remove(eval_path)
os.rmdir(tmp)
