"""A real password hasher (PBKDF2, with few iterations to keep the suite quick) that
counts how often a password was hashed, so a test can show a refused login hashed none."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class CountingPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
    hashed: ClassVar[int] = 0

    def encode(self, password: str, salt: str, iterations: int | None = None) -> str:
        CountingPBKDF2PasswordHasher.hashed += 1
        return super().encode(password, salt, iterations)

    def verify(self, password: str, encoded: str) -> bool:
        # verify() calls encode(): one count per password checked.
        return super().verify(password, encoded)

    def harden_runtime(self, password: str, encoded: str) -> None:
        pass

    def must_update(self, encoded: str) -> bool:
        return False

    def safe_summary(self, encoded: str) -> dict[Any, Any]:
        return super().safe_summary(encoded)
