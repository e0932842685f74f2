"""Compatibility name: the publisher lives in :mod:`.delivery`."""

from .delivery.publisher import Publisher

__all__ = ["Publisher"]
