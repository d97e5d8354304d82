"""The gate's rules, one module per kind; they run in the order of :data:`ORDER`:

- :mod:`.values`: single keys and simple cross-key rules of sweeper's own keys;
- :mod:`.passthrough`: the passthrough dicts against the labelled keys and the installed libraries;
- :mod:`.launcher`: what the launcher can run (``nodes`` on the local launcher);
- :mod:`.hardware`: what the device can run under a truthful label (status ``unsupported``);
- :mod:`.known`: combinations known to fail with the installed library versions (kind ``incompatible``).
"""

from sweeper.point.rules import hardware, known, launcher, passthrough, values

#: The modules whose rules run, in this order (a configuration error is named before a hardware limit).
ORDER = (values, passthrough, launcher, hardware, known)
