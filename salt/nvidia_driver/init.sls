include:
  - .repo
  - .package
  - .service
