"""The cheapest mix of GPU types: prices per GPU-hour, the capacity per type, the integer program."""

__all__: list[str] = []
