"""Course tooling: the exercise registry, the handout generator and the grader (course/EXERCISES.md)."""
