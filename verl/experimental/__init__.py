"""verl's ``verl.experimental`` import paths (agent loops), over the product's implementations."""
