"""The course's own machinery, apart from the decoder: the chapters' helpers (notebook), the labs' checks
(checks, and the generated public checks in labs/), lab building (labbuild) and grading (grading)."""
