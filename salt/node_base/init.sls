include:
  - .packages
  - .config
  - .service
