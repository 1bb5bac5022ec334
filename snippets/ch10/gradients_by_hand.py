# Chapter 10: the gradients of attention for two queries and three keys, by the formulas, checked against
# PyTorch's autograd in float64. Run: python snippets/ch10/gradients_by_hand.py
import numpy as np
import torch

np.set_printoptions(precision=4, suppress=True)
Q = np.array([[1.0, 0.0], [0.5, -1.0]])  # 2 queries, head dim 2
K = np.array([[1.0, 1.0], [0.0, 2.0], [-1.0, 0.5]])  # 3 keys
V = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
dO = np.array([[1.0, -1.0], [0.5, 0.5]])  # what the next layer sends back: dLoss/dO
scale = 1 / np.sqrt(2)

# Forward: S, P, O, and the row logsumexp L the forward pass keeps.
S = Q @ K.T * scale
L = np.log(np.exp(S).sum(axis=1))
P = np.exp(S - L[:, None])
O = P @ V

# Backward, line by line.
dV = P.T @ dO  # O = P V
dP = dO @ V.T
D = (dO * O).sum(axis=1)  # one number per row, from O and dO alone
dS = P * (dP - D[:, None])  # the softmax's backward
dQ = dS @ K * scale  # S = Q Kᵀ · scale
dK = dS.T @ Q * scale
print("P =\n", P)
print("D from dO and O:    ", D)
print("D from P and dP:    ", (P * dP).sum(axis=1))
print("dQ =\n", dQ)

# The same gradients from autograd, in float64.
q, k, v = (torch.tensor(a, requires_grad=True) for a in (Q, K, V))
out = torch.softmax(q @ k.T * scale, dim=1) @ v
out.backward(torch.tensor(dO))
for name, mine, auto in (("dQ", dQ, q.grad), ("dK", dK, k.grad), ("dV", dV, v.grad)):
    print(f"{name} matches autograd: {np.allclose(mine, auto.numpy(), rtol=0, atol=1e-12)}")
