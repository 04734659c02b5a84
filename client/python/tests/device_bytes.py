"""Device memory of an offloader's blocks, measured (streaming) and as the
reference's exchange lays it out, for the checks that streaming in place of
the exchange never holds more."""


def device_bytes(offloader, blocks):
    """Bytes on the device: the ring, and every block tensor that is neither
    in a slot nor a view of a master."""
    slots, masters = offloader.slot_address_ranges(), offloader.master_address_ranges()
    total = sum(end - start for start, end in slots)
    seen = set()
    for block in blocks:
        for tensor in [*block.parameters(), *block.buffers()]:
            address = tensor.data_ptr()
            if tensor.numel() == 0 or address in seen or \
                    any(start <= address < end for start, end in slots + masters):
                continue
            seen.add(address)
            total += tensor.numel() * tensor.element_size()
    return total


def reference_device_bytes(blocks, swap):
    """The reference exchange's layout: blocks 0..N-S-1 whole on the device,
    the others without the `weight` of each of their modules."""
    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors)
    total = 0
    for index, block in enumerate(blocks):
        total += nbytes([*block.parameters(), *block.buffers()])
        if index >= len(blocks) - swap:
            total -= nbytes([m.weight for m in block.modules()
                             if getattr(m, "weight", None) is not None])
    return total
