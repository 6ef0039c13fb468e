"""Small text tools the desk agent may call."""


def count_words(text: str) -> int:
    """Count the words in a piece of text."""
    return len(text.split())


def delete_notes(ticket_id: str) -> str:
    """Delete a ticket's internal notes (denied to the desk by its toolsets)."""
    raise RuntimeError(f"refusing to delete notes of {ticket_id}: this example never writes")
