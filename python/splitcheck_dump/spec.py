"""Speculative decoding figures (SPEC 3.3): `/spec` in a dump.

    spec = SpecRecord(gamma=4)
    spec.add_step(prompt=0, proposals=[5, 9, 9, 2], accepted=2)
    spec.set_emitted(prompt=0, tokens=[...])
    writer.write_spec(spec)

Written as the C++ engine writes it: per prompt `/spec/<p>/proposals` [steps, gamma],
`accepted` [steps], `emitted` [m]; then `/spec/accepted_histogram` [gamma + 1]; and the
attributes `steps`, `gamma`, `acceptance_rate` = sum(a) / (steps * gamma),
`tokens_per_forward` = 1 + sum(a) / steps, `mean_accepted` = sum(a) / steps.
"""

import numpy as np


class SpecRecord:
    """Proposals, accepted lengths and emitted tokens of a greedy verify loop."""

    def __init__(self, gamma):
        self.gamma = int(gamma)
        self._proposals = {}
        self._accepted = {}
        self._emitted = {}

    def add_step(self, prompt, proposals, accepted):
        proposals = [int(x) for x in proposals]
        if len(proposals) != self.gamma:
            raise ValueError(f"prompt {prompt}: {len(proposals)} proposals, gamma is {self.gamma}")
        if not 0 <= int(accepted) <= self.gamma:
            raise ValueError(f"prompt {prompt}: accepted {accepted} outside 0..{self.gamma}")
        self._proposals.setdefault(int(prompt), []).append(proposals)
        self._accepted.setdefault(int(prompt), []).append(int(accepted))

    def set_emitted(self, prompt, tokens):
        self._emitted[int(prompt)] = [int(t) for t in tokens]

    @property
    def prompts(self):
        return sorted(set(self._proposals) | set(self._emitted))

    def histogram(self):
        hist = np.zeros(self.gamma + 1, dtype=np.int32)
        for accepted in self._accepted.values():
            for a in accepted:
                hist[a] += 1
        return hist

    def figures(self):
        """steps, gamma, acceptance_rate, tokens_per_forward, mean_accepted."""
        steps = sum(len(a) for a in self._accepted.values())
        total = sum(sum(a) for a in self._accepted.values())
        out = {"steps": np.int64(steps), "gamma": np.int64(self.gamma),
               "acceptance_rate": 0.0, "tokens_per_forward": 0.0, "mean_accepted": 0.0}
        if steps:
            out["acceptance_rate"] = total / (steps * self.gamma)
            out["tokens_per_forward"] = 1.0 + total / steps
            out["mean_accepted"] = total / steps
        out.update({k: np.float64(v) for k, v in out.items() if isinstance(v, float)})
        return out

    def datasets(self):
        """(path without leading slash, int32 array) in the order they are written."""
        out = []
        for p in self.prompts:
            proposals = np.array(self._proposals.get(p, []), dtype=np.int32)
            out.append((f"spec/{p}/proposals", proposals.reshape(-1, self.gamma)))
            out.append((f"spec/{p}/accepted", np.array(self._accepted.get(p, []), np.int32)))
            out.append((f"spec/{p}/emitted", np.array(self._emitted.get(p, []), np.int32)))
        out.append(("spec/accepted_histogram", self.histogram()))
        return out
