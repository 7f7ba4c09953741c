// Anchor translation unit of the colo_pch object library (the PCH is built with it).
