"""What holds the training job back, judged from one typed input per interval."""
