"""Run untrusted, model-written Python on images: jailed pre-forked workers, one child per call.

```python
from beacon.sandbox import Sandbox
with Sandbox() as sb:
    sess = sb.session(images=[pil_image])
    r = sess.run("print(image.size)")
    r.ok, r.stdout, r.error, r.images, r.timed_out, r.elapsed_s
```

See docs/sandbox.md for the isolation layers, the limits and what is not covered.
"""

from beacon.sandbox.config import ExecResult, SandboxConfig, SandboxError
from beacon.sandbox.sandbox import Sandbox, Session

__all__ = ["ExecResult", "Sandbox", "SandboxConfig", "SandboxError", "Session"]
