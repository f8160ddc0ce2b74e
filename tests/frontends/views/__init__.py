"""What the views say of a run's health, and the text they let reach a terminal."""
