"""Write a converted output back out in a form another tool replays (`slime_pt.py`)."""
