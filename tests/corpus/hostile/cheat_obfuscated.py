# hostile: removes the import guard from sys.meta_path, spells 'reference' with chr(), puts the project root (found through the worker's path, sys.argv[0]) on sys.path, and tries to import or read the answer key and the solution notebook; expect a flag, nothing readable (prints ANSWER KEY NOT REACHABLE), score 0
import importlib
import os
import sys

sys.meta_path[:] = [finder for finder in sys.meta_path if "Block" not in type(finder).__name__]
NAME = "".join(map(chr, [114, 101, 102, 101, 114, 101, 110, 99, 101]))
HERE = os.path.abspath(sys.argv[0])  # the worker script (cells run in IPython's __main__, which has no file)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
importlib.invalidate_caches()
reached = []
try:
    module = importlib.import_module(NAME + ".paged_attention")
    globals().update({k: getattr(module, k) for k in ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")})
    reached.append("import")
except Exception as error:
    print("import failed:", type(error).__name__)
for relative in (NAME + "/paged_attention.py", "notebooks/source/paged_attention.py", "notebooks/paged_attention_solution.ipynb", "grader/checks/attention.py"):
    try:
        with open(os.path.join(ROOT, relative)) as f:
            text = f.read()
        reached.append(relative)
        if relative.endswith(".py") and "def paged_attention" in text:
            exec(compile(text, relative, "exec"), globals())
    except Exception as error:
        print("read failed:", relative, type(error).__name__)
if not reached:
    print("ANSWER KEY NOT REACHABLE")
