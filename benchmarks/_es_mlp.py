"""The real workload of ``early_stopping.py``: a one-hidden-layer network trained with numpy on
scikit-learn's digits (8x8 images of handwritten digits, 1,797 of them, shipped inside the
package), and the dse trial that trains one config epoch by epoch.

The hyper-parameters are the learning rate ``lr`` of SGD with momentum 0.9, the L2 penalty
``l2``, the hidden ``width`` and the minibatch size ``batch``. One step is one epoch over the
training images; the value reported after it is the cross-entropy on the held-out images
(``val_loss``; a diverged run reports ``DIVERGED``). Training is deterministic: the weights
start from a fixed seed and epoch ``e`` visits the images in an order seeded by ``e``, so a
config's curve is the same in every method, and an attempt resumed from a checkpoint goes on
exactly where the interrupted one was.

As a trial (``python _es_mlp.py DATA.npz MAX_STEP``; the harness writes ``DATA.npz`` once from
``sklearn.datasets.load_digits``, so a trial imports numpy only): resumes from the checkpoint
(``state.npz`` in ``DSE_CHECKPOINT_DIR``: weights, velocities and the epoch) if there is one,
then for each epoch trains, saves the checkpoint, and only then reports ``val_loss``
(``dse.trial.report_progress``); after ``MAX_STEP`` epochs it writes the result.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

MOMENTUM = 0.9
DIVERGED = 10.0
"""The loss reported for a run whose weights overflowed (chance level is ln 10 = 2.3)."""
_NAMES = ("w1", "b1", "w2", "b2")


def load_digits_split(path: str) -> dict[str, Any]:
    """The split the harness wrote: ``x_train``, ``y_train``, ``x_val``, ``y_val``."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def write_digits_split(path: str) -> None:
    """Write ``sklearn.datasets.load_digits`` as a fixed train/validation split (600 held
    out), pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float64) / 16.0
    y = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    val, train = order[:600], order[600:]
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(tmp, x_train=x[train], y_train=y[train], x_val=x[val], y_val=y[val])
    os.replace(tmp, path)


class Trainer:
    """One config's network and optimiser state; :meth:`epoch` trains one epoch."""

    def __init__(self, params: dict[str, Any], data: dict[str, Any]) -> None:
        self.lr = float(params["lr"])
        self.l2 = float(params["l2"])
        self.batch = int(params["batch"])
        width = int(params["width"])
        self.data = data
        features = data["x_train"].shape[1]
        rng = np.random.default_rng(0)
        self.weights: dict[str, Array] = {
            "w1": rng.normal(0.0, np.sqrt(2.0 / features), (features, width)),
            "b1": np.zeros(width),
            "w2": rng.normal(0.0, np.sqrt(1.0 / width), (width, 10)),
            "b2": np.zeros(10),
        }
        self.velocity = {name: np.zeros_like(w) for name, w in self.weights.items()}
        self.epochs = 0
        self.diverged = False

    def state(self) -> dict[str, Array]:
        out = dict(self.weights)
        out.update({f"v_{name}": v for name, v in self.velocity.items()})
        out["epochs"] = np.array([self.epochs, int(self.diverged)], dtype=np.float64)
        return out

    def load(self, state: dict[str, Array]) -> None:
        for name in _NAMES:
            self.weights[name] = state[name]
            self.velocity[name] = state[f"v_{name}"]
        self.epochs, diverged = (int(x) for x in state["epochs"])
        self.diverged = bool(diverged)

    def _forward(self, x: Array) -> tuple[Array, Array]:
        w = self.weights
        hidden = np.maximum(x @ w["w1"] + w["b1"], 0.0)
        logits = hidden @ w["w2"] + w["b2"]
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return hidden, probs

    def epoch(self) -> float:
        """Train one epoch (images in an order seeded by the epoch) and return the validation
        loss after it."""
        self.epochs += 1
        if not self.diverged:
            x, y = self.data["x_train"], self.data["y_train"]
            order = np.random.default_rng(self.epochs).permutation(len(y))
            with np.errstate(over="ignore", invalid="ignore"):
                for start in range(0, len(y), self.batch):
                    self._update(x[order[start:start + self.batch]],
                                 y[order[start:start + self.batch]])
                self.diverged = not all(np.isfinite(w).all() for w in self.weights.values())
        return self.val_loss()

    def _update(self, x: Array, y: npt.NDArray[np.int64]) -> None:
        w = self.weights
        hidden, probs = self._forward(x)
        probs[np.arange(len(y)), y] -= 1.0
        probs /= len(y)
        grads = {
            "w2": hidden.T @ probs + self.l2 * w["w2"],
            "b2": probs.sum(axis=0),
        }
        back = (probs @ w["w2"].T) * (hidden > 0)
        grads["w1"] = x.T @ back + self.l2 * w["w1"]
        grads["b1"] = back.sum(axis=0)
        for name in _NAMES:
            v = self.velocity[name]
            v *= MOMENTUM
            v -= self.lr * grads[name]
            w[name] += v

    def val_loss(self) -> float:
        if self.diverged:
            return DIVERGED
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            _, probs = self._forward(self.data["x_val"])
            picked = probs[np.arange(len(self.data["y_val"])), self.data["y_val"]]
            loss = float(-np.mean(np.log(np.maximum(picked, 1e-12))))
        return loss if np.isfinite(loss) and loss < DIVERGED else DIVERGED


def main(argv: list[str]) -> int:
    import dse.trial

    data_path, max_step = argv[0], int(argv[1])
    trainer = Trainer(dse.trial.params(), load_digits_split(data_path))
    checkpoint = dse.trial.checkpoint_dir() / "state.npz"
    if checkpoint.exists():
        with np.load(checkpoint) as saved:
            trainer.load({name: saved[name] for name in saved.files})
    loss = trainer.val_loss()
    while trainer.epochs < max_step:
        loss = trainer.epoch()
        tmp = checkpoint.with_name(f"state.{os.getpid()}.tmp.npz")
        arrays: dict[str, Any] = trainer.state()
        np.savez(tmp, **arrays)
        os.replace(tmp, checkpoint)  # the checkpoint of an epoch is saved before it is reported
        dse.trial.checkpointed()
        dse.trial.report_progress(trainer.epochs, {"val_loss": loss})
    dse.trial.report({"val_loss": loss}, epochs=trainer.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
