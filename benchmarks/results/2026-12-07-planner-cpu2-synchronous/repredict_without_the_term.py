import json, subprocess, sys
rows = []
for i in range(1, 7):
    d = f"/tmp/pr{i}"
    c = json.load(open(f"{d}/cluster_2.json")); c["synchronous_extra_latency_us"] = 0
    json.dump(c, open(f"{d}/cluster_2_noextra.json", "w"))
    res = json.load(open(f"{d}/results.json"))
    for r in res["rows"]:
        cmd = ["build/bin/colo-plan", "--model", "tiny", "--image-size", "64", "--patch-size", "8", "--hidden", "128", "--depth", "6", "--heads", "4", "--mlp-ratio", "4", "--num-classes", "10", "--world-size", "2", "--global-batch", "16", "--precision", "fp32", "--profile", f"{d}/profile_small.json", "--cluster", f"{d}/cluster_2_noextra.json", "--explain", r["layout"], "--json", f"{d}/noextra.json"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        p = json.load(open(f"{d}/noextra.json"))["explained"][0]["images_per_s"]
        m = r["measured_images_per_s"]
        print(f"run {i} {r['layout']}: measured {m:.2f}, with the term {r['predicted_images_per_s']:.2f} ({100*r['error']:+.1f} %), without {p:.2f} ({100*(p-m)/m:+.1f} %)")
